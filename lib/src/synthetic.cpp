// Placeholder until this area lands; replaced by its implementation.
#include "pagecheck/synthetic.hpp"
