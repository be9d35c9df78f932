// base: what every stage shares and nothing more — errors as values (result.h) and the
// release's version (version.h).
#pragma once
#include "base/result.h"
#include "base/version.h"
