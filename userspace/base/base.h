// base: what every stage shares and nothing more — errors as values (result.h).
#pragma once
#include "base/result.h"
