// base: what every stage shares and nothing more — errors as values (result.h), the
// release's version (version.h) and the records' clock (clock.h).
#pragma once
#include "base/clock.h"
#include "base/result.h"
#include "base/version.h"
