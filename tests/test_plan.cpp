#include <doctest/doctest.h>
// Filled in by the plan area.
