#pragma once
// Stub for compile checks (see README.md): handle and status types only.
typedef struct cusolverDnContext* cusolverDnHandle_t;
typedef enum { CUSOLVER_STATUS_SUCCESS = 0, CUSOLVER_STATUS_INVALID_VALUE = 3 } cusolverStatus_t;
