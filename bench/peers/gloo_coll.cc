// The Gloo side of bench/compare: allreduce, allgather, reduce-scatter
// (halving-doubling) or broadcast over Gloo's TCP transport on loopback,
// timed and checked like mpi_coll.c. Ranks come from chorusrun
// (CHORUS_RANK / CHORUS_NRANKS); the rendezvous is a FileStore directory,
// which works across network namespaces on one machine too.
//   gloo_coll <allreduce|allgather|reducescatter|broadcast> <minbytes> <maxbytes> <iters> <storedir>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s coll minbytes maxbytes iters storedir\n", argv[0]);
    return 2;
  }
  int rank = atoi(getenv("CHORUS_RANK")), n = atoi(getenv("CHORUS_NRANKS"));
  std::string coll = argv[1];
  size_t minB = strtoull(argv[2], nullptr, 0), maxB = strtoull(argv[3], nullptr, 0);
  int iters = atoi(argv[4]);
  // GLOO_SOCKET_IFNAME (PyTorch's name for it) picks the interface across
  // hosts; loopback otherwise.
  gloo::transport::tcp::attr attr("127.0.0.1");
  const char *ifname = getenv("GLOO_SOCKET_IFNAME");
  if (ifname && *ifname) {
    attr = gloo::transport::tcp::attr();
    attr.iface = ifname;
  }
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[5]);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->connectFullMesh(store, dev);
  std::vector<float> send(maxB / 4 * n + 16), recv(maxB / 4 * n + 16);
  bool ag = coll == "allgather", rs = coll == "reducescatter", bc = coll == "broadcast";
  long wrongTotal = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= 2) {
    size_t count = bytes / 4, per = (count / n) & ~(size_t)3;
    size_t c = (ag || rs) ? per : count;
    if (c == 0) continue;
    auto run = [&]() {
      if (ag) {
        gloo::AllgatherOptions o(ctx);
        o.setInput(send.data(), c);
        o.setOutput(recv.data(), c * n);
        gloo::allgather(o);
      } else if (rs) {
        std::vector<int> counts(n, (int)c);
        gloo::ReduceScatterHalvingDoubling<float> algo(ctx, {send.data()}, (int)(c * n), counts);
        algo.run();
      } else if (bc) {
        gloo::BroadcastOptions o(ctx);
        o.setRoot(0);
        o.setOutput(send.data(), c);
        gloo::broadcast(o);
      } else {
        gloo::AllreduceOptions o(ctx);
        o.setInput(send.data(), c);
        o.setOutput(recv.data(), c);
        o.setReduceFunction(
            static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
        gloo::allreduce(o);
      }
    };
    for (int w = 0; w < 2; w++) run();
    double t0 = now();
    for (int i = 0; i < iters; i++) run();
    double t = (now() - t0) / iters;
    // Check: integer-valued inputs, exact in any order. Gloo's reduce-scatter
    // works in place and leaves rank r's block at the start of the buffer.
    size_t in = rs ? c * n : c;
    for (size_t i = 0; i < in; i++) send[i] = (float)((rank + 1) * ((i % 5) + 1));
    std::fill(recv.begin(), recv.begin() + (ag ? c * n : c), 0.0f);
    run();
    long wrong = 0;
    float rsum = (float)(n * (n + 1) / 2);
    if (ag) {
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < c; i++) wrong += recv[r * c + i] != (float)((r + 1) * ((i % 5) + 1));
    } else if (rs) {
      for (size_t i = 0; i < c; i++) wrong += send[i] != rsum * (float)(((rank * c + i) % 5) + 1);
    } else if (bc) {
      for (size_t i = 0; i < c; i++) wrong += send[i] != (float)((i % 5) + 1);
    } else {
      for (size_t i = 0; i < c; i++) wrong += recv[i] != rsum * (float)((i % 5) + 1);
    }
    {  // every rank's count, summed, as the MPI side reports it
      float w = (float)wrong, sum = 0;
      gloo::AllreduceOptions o(ctx);
      o.setInput(&w, 1);
      o.setOutput(&sum, 1);
      o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
      wrong = (long)sum;
    }
    wrongTotal += wrong;
    double algBytes = (ag || rs) ? (double)c * 4 * n : (double)c * 4;
    double factor = bc ? 1 : (ag || rs) ? (double)(n - 1) / n : 2.0 * (n - 1) / n;
    double alg = algBytes / 1e9 / t;
    if (rank == 0) {
      printf("%12zu  %12zu  %10.2f  %8.3f  %8.3f  %6ld\n", (size_t)algBytes, c, t * 1e6, alg, alg * factor, wrong);
      fflush(stdout);
    }
  }
  return wrongTotal ? 1 : 0;
}
