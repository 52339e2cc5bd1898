#pragma once
// Stub for compile checks: the CUDA build of PyTorch generates this header.
