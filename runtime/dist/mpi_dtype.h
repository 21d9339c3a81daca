// MPI datatypes and reduction operators for every common::Dtype. bf16 and fp16 have no MPI type: they
// travel as 2-byte elements and are reduced by user-defined operators that compute in fp32 and
// round to nearest even (never by treating the bits as integers).
#pragma once

#include <mpi.h>

#include "runtime/dist/dist_types.h"

namespace shardtune::dist {

MPI_Datatype mpi_datatype(common::Dtype t);

// The MPI operator for `op` on `t`. kAvg is reduced as kSum; the caller divides.
MPI_Op mpi_op(common::Dtype t, ReduceOp op);

}  // namespace shardtune::dist
