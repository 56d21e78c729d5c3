// Compiled by ctest with the model layer's include path only (CMakeLists.txt, "layer rule"):
// data/ and core/ are below model/, so this must compile (the control for upward_include.cpp).
#include "core/error.h"
#include "data/batch.h"
