#pragma once
// Stub for compile checks (see README.md): handle and status types only.
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
