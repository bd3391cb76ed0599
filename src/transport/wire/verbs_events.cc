// SPDX-License-Identifier: BSD-3-Clause
#if ROCENANTE_HAVE_IBVERBS

#include "transport/wire/verbs_events.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "core/check.h"
#include "transport/wire/verbs_api.h"

namespace rcn {

rcnResult_t VerbsEventThread::start(ibv_context* context, NameQp nameQp, OnFatal onFatal, std::string* why) {
  context_ = context;
  nameQp_ = std::move(nameQp);
  onFatal_ = std::move(onFatal);
  const int flags = fcntl(context->async_fd, F_GETFL);
  if (flags == -1 || fcntl(context->async_fd, F_SETFL, flags | O_NONBLOCK) == -1) {
    *why = errnoText("verbs wire: making the device's event descriptor non-blocking", errno);
    return rcnSystemError;
  }
  wakeFd_ = eventfd(0, EFD_CLOEXEC);
  if (wakeFd_ == -1) {
    *why = errnoText("verbs wire: eventfd for the event thread", errno);
    return rcnSystemError;
  }
  thread_ = std::thread([this] { loop(); });
  return rcnSuccess;
}

void VerbsEventThread::stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (write(wakeFd_, &one, sizeof one) != ssize_t(sizeof one))
      RCN_WARN(RCN_LOG_TRANSPORT, "verbs wire: waking the event thread failed: %s", strerror(errno));
    thread_.join();
  }
  if (wakeFd_ != -1) close(wakeFd_);
  wakeFd_ = -1;
}

void VerbsEventThread::loop() {
  const VerbsApi& api = verbsApi();
  for (;;) {
    pollfd fds[2] = {{context_->async_fd, POLLIN, 0}, {wakeFd_, POLLIN, 0}};
    if (poll(fds, 2, -1) == -1) {
      if (errno == EINTR) continue;
      onFatal_(errnoText("verbs wire: poll on the device's events", errno));
      return;
    }
    if (fds[1].revents) return;
    ibv_async_event event{};
    while (api.getAsyncEvent(context_, &event) == 0) {
      handle(event);
      api.ackAsyncEvent(&event);
    }
  }
}

void VerbsEventThread::handle(const ibv_async_event& event) {
  const char* type = verbsApi().eventTypeStr(event.event_type);
  switch (event.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      onFatal_("verbs wire: " + nameQp_(event.element.qp) + " failed (" + type + ")");
      return;
    case IBV_EVENT_CQ_ERR: onFatal_(std::string("verbs wire: a completion queue failed (") + type + ")"); return;
    case IBV_EVENT_PORT_ERR:
      onFatal_("verbs wire: port " + std::to_string(event.element.port_num) + " went down (" + type + ")");
      return;
    case IBV_EVENT_DEVICE_FATAL: onFatal_(std::string("verbs wire: the RDMA device failed (") + type + ")"); return;
    default: RCN_INFO(RCN_LOG_TRANSPORT, "verbs wire: device event '%s'", type);
  }
}

}  // namespace rcn

#endif  // ROCENANTE_HAVE_IBVERBS
