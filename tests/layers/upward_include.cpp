// Compiled by ctest with the model layer's include path only (CMakeLists.txt, "layer rule"):
// train/ is above model/, so this must NOT compile. Its twin downward_include.cpp must.
#include "train/trainer.h"
