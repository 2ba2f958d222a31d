#include "core/observe.h"

int observeUsers; /* observeAny */
