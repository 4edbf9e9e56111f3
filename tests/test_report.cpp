#include <doctest/doctest.h>
// Filled in by the report area.
