#include "core/fast_path.h"

#include "core/log.h"

namespace rcn {

rcnResult_t FastPath::allReduce(const void* send, void* recv, size_t count, rcnDataType_t dtype, rcnRedOp_t op,
                                cudaStream_t stream) {
  std::string why;
  const rcnResult_t failed = asyncError(&why);
  if (failed != rcnSuccess) {
    RCN_WARN(RCN_LOG_COLL, "all-reduce refused: this communicator's %s path failed before (%s); abort it",
             transportName(), why.c_str());
    return failed;
  }
  return enqueue(send, recv, count, dtype, op, stream);
}

}  // namespace rcn
