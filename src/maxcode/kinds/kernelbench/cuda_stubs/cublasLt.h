#pragma once
// Stub for compile checks (see README.md): handle type only.
typedef struct cublasLtContext* cublasLtHandle_t;
