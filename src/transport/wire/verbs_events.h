// SPDX-License-Identifier: BSD-3-Clause
// A device context's asynchronous events, watched on a thread of its own so
// that the wire's hot path never asks a QP for its state (ibv_query_qp is a
// system call). A QP, CQ, port or device that goes bad is reported once,
// through onFatal, with a text that names what broke; other events are only
// logged.
#pragma once

#if ROCENANTE_HAVE_IBVERBS

#include <infiniband/verbs.h>

#include <functional>
#include <string>
#include <thread>

#include "rocenante/rocenante.h"

namespace rcn {

class VerbsEventThread {
 public:
  // What a QP is, for the messages ("the queue pair to rank 3").
  using NameQp = std::function<std::string(const ibv_qp*)>;
  using OnFatal = std::function<void(const std::string&)>;

  ~VerbsEventThread() { stop(); }
  // Makes context->async_fd non-blocking and starts the thread.
  rcnResult_t start(ibv_context* context, NameQp nameQp, OnFatal onFatal, std::string* why);
  // Wakes and joins the thread (at once, not at a poll timeout).
  void stop();

 private:
  void loop();
  void handle(const ibv_async_event& event);

  ibv_context* context_ = nullptr;
  NameQp nameQp_;
  OnFatal onFatal_;
  int wakeFd_ = -1;
  std::thread thread_;
};

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
