#include "perf_colls.h"
int main(int argc, char **argv) { return perfMain(argc, argv, &alltoallvColl); }
