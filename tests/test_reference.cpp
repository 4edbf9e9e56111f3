#include <doctest/doctest.h>
// Filled in by the reference area.
