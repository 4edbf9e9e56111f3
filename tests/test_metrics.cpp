#include <doctest/doctest.h>
// Filled in by the metrics area.
