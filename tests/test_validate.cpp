#include <doctest/doctest.h>
// Filled in by the validate area.
