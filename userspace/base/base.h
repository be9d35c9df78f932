// base: what every stage shares and nothing more — errors as values (result.h), the
// release's version (version.h) and the records' clock (clock.h). The readers of JSON files
// include json_count.h themselves (counts that never wrap; it needs nlohmann_json).
#pragma once
#include "base/clock.h"
#include "base/result.h"
#include "base/version.h"
