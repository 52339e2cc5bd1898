#pragma once
// Stub for compile checks (see README.md).
#include "cusolverDn.h"
