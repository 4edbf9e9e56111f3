#include "pagecheck/reference.hpp"
