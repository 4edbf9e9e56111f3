#include <doctest/doctest.h>
// Filled in by the synthetic area.
