// The Gloo side of pg/gloo_shim.h: a gloo::rendezvous::Store over the C
// callbacks (served by rank 0 through RPC, pg/store.c), the TCP full mesh,
// and allreduce/broadcast/allgather, each catching every exception
// (none crosses extern "C"). Gloo also throws on its own event-loop thread,
// where no caller can catch it (a peer sending more bytes than a buffer
// holds: std::terminate); process_group.c keeps that from happening
// between members that run this library by agreeing on every collective's
// sizes first, with a fixed-size allgather.
#include "pg/gloo_shim.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <time.h>

namespace {

class CStore : public gloo::rendezvous::Store {
 public:
  CStore(const gloo_store_ops *ops, void *user, int timeout_ms) : ops_(ops), user_(user), timeout_ms_(timeout_ms) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    char err[256] = "";
    if (ops_->set(user_, key.c_str(), data.data(), data.size(), err, sizeof err) != 0)
      throw gloo::IoException(std::string("store set '") + key + "': " + err);
  }

  std::vector<char> get(const std::string &key) override { return get_for(key, timeout_ms_); }

  void wait(const std::vector<std::string> &keys) override { wait(keys, std::chrono::milliseconds(timeout_ms_)); }

  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override {
    for (const auto &k : keys) get_for(k, (int)timeout.count());
  }

 private:
  std::vector<char> get_for(const std::string &key, int timeout_ms) {
    char err[256] = "";
    void *data = nullptr;
    size_t n = 0;
    if (ops_->get(user_, key.c_str(), timeout_ms, &data, &n, err, sizeof err) != 0)
      throw gloo::IoException(std::string("store get '") + key + "': " + err);
    std::vector<char> v((char *)data, (char *)data + n);
    free(data);
    return v;
  }

  const gloo_store_ops *ops_;
  void *user_;
  int timeout_ms_;
};

void set_err(char *err, size_t cap, const char *what) { snprintf(err, cap, "%s", what); }

// Gloo writes to its sockets without MSG_NOSIGNAL: a write to a member that
// died raises SIGPIPE, whose default action kills the process (Python, and
// so PyTorch, ignores SIGPIPE; a C program does not). For the span of a
// call, SIGPIPE is blocked on the calling thread (the device's event-loop
// thread, made inside gloo_ctx_new, inherits the block for good) and one
// raised meanwhile is consumed before the mask is restored; the write
// itself fails with EPIPE, which Gloo reports as an error.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SigpipeGuard() {
    if (!sigismember(&old_, SIGPIPE)) {
      sigset_t s;
      sigemptyset(&s);
      sigaddset(&s, SIGPIPE);
      struct timespec zero = {0, 0};
      while (sigtimedwait(&s, nullptr, &zero) > 0) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
};

template <typename T>
void allreduce_t(const std::shared_ptr<gloo::Context> &ctx, void *buf, size_t n, uint32_t tag) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(static_cast<T *>(buf), n);
  o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<T>));
  o.setTag(tag);
  gloo::allreduce(o);
}

}  // namespace

struct gloo_ctx {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
};

extern "C" struct gloo_ctx *gloo_ctx_new(int rank, int size, const char *host, const struct gloo_store_ops *store,
                                         void *user, int timeout_ms, char *err, size_t cap) {
  SigpipeGuard guard;
  try {
    gloo::transport::tcp::attr attr(host);
    auto dev = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(std::chrono::milliseconds(timeout_ms));
    CStore s(store, user, timeout_ms);
    ctx->connectFullMesh(s, dev);
    auto *c = new gloo_ctx;
    c->ctx = ctx;
    return c;
  } catch (const std::exception &e) {
    set_err(err, cap, e.what());
    return nullptr;
  } catch (...) {
    set_err(err, cap, "gloo: an exception that is no std::exception");
    return nullptr;
  }
}

extern "C" void gloo_ctx_free(struct gloo_ctx *c) {
  SigpipeGuard guard;
  try {
    delete c;
  } catch (...) {   // a destructor that throws: nothing left to report to
  }
}

extern "C" int gloo_allreduce_sum(struct gloo_ctx *c, void *buf, size_t n, enum dtype dt, uint32_t tag, char *err,
                                  size_t cap) {
  SigpipeGuard guard;
  try {
    switch (dt) {
      case DTYPE_F32: allreduce_t<float>(c->ctx, buf, n, tag); break;
      case DTYPE_F64: allreduce_t<double>(c->ctx, buf, n, tag); break;
      case DTYPE_I32: allreduce_t<int32_t>(c->ctx, buf, n, tag); break;
      case DTYPE_I64: allreduce_t<int64_t>(c->ctx, buf, n, tag); break;
      case DTYPE_U8: allreduce_t<uint8_t>(c->ctx, buf, n, tag); break;
      default: set_err(err, cap, "unsupported dtype"); return -1;
    }
    return 0;
  } catch (const std::exception &e) {
    set_err(err, cap, e.what());
    return -1;
  } catch (...) {
    set_err(err, cap, "gloo: an exception that is no std::exception");
    return -1;
  }
}

extern "C" int gloo_broadcast(struct gloo_ctx *c, void *buf, size_t nbytes, int root, uint32_t tag, char *err,
                              size_t cap) {
  SigpipeGuard guard;
  try {
    gloo::BroadcastOptions o(c->ctx);
    o.setOutput(static_cast<uint8_t *>(buf), nbytes);
    o.setRoot(root);
    o.setTag(tag);
    gloo::broadcast(o);
    return 0;
  } catch (const std::exception &e) {
    set_err(err, cap, e.what());
    return -1;
  } catch (...) {
    set_err(err, cap, "gloo: an exception that is no std::exception");
    return -1;
  }
}

extern "C" int gloo_allgather(struct gloo_ctx *c, const void *in, void *out, size_t nbytes, uint32_t tag, char *err,
                              size_t cap) {
  SigpipeGuard guard;
  try {
    gloo::AllgatherOptions o(c->ctx);
    o.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(in)), nbytes);
    o.setOutput(static_cast<uint8_t *>(out), nbytes * (size_t)c->ctx->size);
    o.setTag(tag);
    gloo::allgather(o);
    return 0;
  } catch (const std::exception &e) {
    set_err(err, cap, e.what());
    return -1;
  } catch (...) {
    set_err(err, cap, "gloo: an exception that is no std::exception");
    return -1;
  }
}
