#include "pagecheck/gpu.hpp"
