/* chorus's host-CUDA shim: programs that include the runtime API header by
 * its own name get the same declarations (see cuda_runtime.h). */
#include "cuda_runtime.h"
