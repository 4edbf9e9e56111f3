#include <doctest/doctest.h>
// Filled in by the safetensors area.
