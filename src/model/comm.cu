// NCCL implementation of braid::model::Comm, and the variant whose all-reduce is braid::AllReducer.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "braid/env.hpp"
#include "braid/errors.hpp"
#include "braid/model/comm.hpp"

namespace braid::model {
namespace {

class NcclComm : public Comm {
 public:
  explicit NcclComm(Team& team) : team_(team), nccl_(team.nccl()) {}
  NcclComm(Team& team, int max_ctas) : team_(team) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (max_ctas > 0) cfg.minCTAs = 1, cfg.maxCTAs = max_ctas;
    max_ctas_ = max_ctas;
    BRAID_NCCL_CHECK(ncclCommSplit(team.nccl(), 0, team.rank(), &nccl_, &cfg));
    owned_ = true;
  }
  ~NcclComm() override {
    if (owned_ && nccl_) ncclCommDestroy(nccl_);
  }
  int rank() const override { return team_.rank(); }
  int size() const override { return team_.size(); }
  std::string name() const override { return "nccl"; }
  void all_gather(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    BRAID_NCCL_CHECK(ncclAllGather(in, out, count, bench::nccl_dtype(t), nccl_, s));
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    BRAID_NCCL_CHECK(ncclReduceScatter(in, out, count, bench::nccl_dtype(t), ncclSum, nccl_, s));
  }
  void all_reduce(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    BRAID_NCCL_CHECK(ncclAllReduce(in, out, count, bench::nccl_dtype(t), ncclSum, nccl_, s));
  }
  void all_to_all_v(const void* in, const size_t* send_counts, const size_t* send_displs, void* out,
                    const size_t* recv_counts, const size_t* recv_displs, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t);
    const ncclDataType_t nt = bench::nccl_dtype(t);
    BRAID_NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size(); ++r) {
      if (send_counts[r])
        BRAID_NCCL_CHECK(ncclSend(static_cast<const char*>(in) + send_displs[r] * es, send_counts[r], nt, r,
                                  nccl_, s));
      if (recv_counts[r])
        BRAID_NCCL_CHECK(ncclRecv(static_cast<char*>(out) + recv_displs[r] * es, recv_counts[r], nt, r,
                                  nccl_, s));
    }
    BRAID_NCCL_CHECK(ncclGroupEnd());
  }
  // NCCL's send/receive take host counts: the device-counted exchange goes through a peer comm of this comm's own
  // (its staging sized by reserve_rows_exchange), ordered with the NCCL calls by the caller's stream.
  void all_to_all_rows(const void* in, void* out, const int* rows_mat, bool transpose, size_t row_elems,
                       size_t max_rows, DType t, cudaStream_t s) override {
    if (size() == 1) return Comm::all_to_all_rows(in, out, rows_mat, transpose, row_elems, max_rows, t, s);
    BRAID_REQUIRE(rows_ != nullptr, "nccl comm: all_to_all_rows before reserve_rows_exchange");
    rows_->all_to_all_rows(in, out, rows_mat, transpose, row_elems, max_rows, t, s);
  }
  void reserve_rows_exchange(size_t max_rows, size_t row_elems, DType t) override {
    if (size() == 1) return;
    if (!rows_) {
      if (!team_.peer_ok())
        throw UnavailableError("nccl comm: the all-to-all with device counts needs peer memory between the ranks (" +
                                   team_.peer_status() + ")",
                               __FILE__, __LINE__);
      PeerCommOptions o;
      o.staging_bytes = std::max<size_t>(size_t(1) << 20, max_rows * row_elems * bench::dtype_size(t));
      o.max_ctas = max_ctas_;  // a throttled communicator's rows exchange is throttled too
      rows_ = make_peer_comm(team_, o);
    }
    rows_->reserve_rows_exchange(max_rows, row_elems, t);
  }

 protected:
  Team& team_;
  ncclComm_t nccl_ = nullptr;
  bool owned_ = false;
  int max_ctas_ = 0;            // make_nccl_comm_split's cap (0: none), also the rows exchange's
  std::unique_ptr<Comm> rows_;  // the peer comm of all_to_all_rows (reserve_rows_exchange), or none
};

class AllReducerComm : public NcclComm {
 public:
  AllReducerComm(Team& team, AllReduceOptions opt) : NcclComm(team), ar_(team), opt_(opt) {}
  std::string name() const override { return std::string("nccl+allreducer:") + algo_name(opt_.algo); }
  void all_reduce(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    if (t == DType::kFP32) return NcclComm::all_reduce(in, out, count, t, s);  // AllReducer: bf16/fp16 only
    ar_.run(in, out, count, t, s, opt_);
  }

 private:
  AllReducer ar_;
  AllReduceOptions opt_;
};

class NcclCeComm : public NcclComm {
 public:
  explicit NcclCeComm(Team& team) : NcclComm(team, 0), ce_(team.split_nccl_zero_cta()) {
    // One eager copy-engine all-gather: NCCL allocates its copy-engine state at the first one.
    const size_t count = 256;
    void* w = alloc_window(count * size_t(size()) * 2);
    cudaStream_t s = team.stream();
    all_gather(static_cast<char*>(w) + size_t(rank()) * count * 2, w, count, DType::kBF16, s);
    team.synchronize(s, "nccl-ce comm warm-up");
    free_window(w);
  }
  ~NcclCeComm() override {
    // Deregistered on their communicator before it goes, the registered (borrowed) ones first.
    for (size_t k = 0; k < windows_.size(); ++k)
      if (!windows_[k]->owned()) windows_[k].reset();
    windows_.clear();
    if (ce_) ncclCommDestroy(ce_);
  }
  std::string name() const override { return "nccl-ce"; }
  void* alloc_window(size_t bytes) override {
    auto w = std::make_unique<NcclWindow>(ce_, std::max<size_t>(bytes, 256));
    void* p = w->get();
    windows_.push_back(std::move(w));
    refs_.push_back(1);
    return p;
  }
  void free_window(void* p) override {
    for (size_t k = 0; k < windows_.size(); ++k)
      if (windows_[k]->get() == p) {
        if (--refs_[k] > 0) return;  // registered for another caller still
        windows_.erase(windows_.begin() + long(k));
        refs_.erase(refs_.begin() + long(k));
        return;
      }
    throw UsageError("nccl-ce comm: free_window of memory it did not allocate or register", __FILE__, __LINE__);
  }
  // Registering memory again (two layers sharing one owner's scratch over this comm) counts one more free_window.
  bool register_window(void* p, size_t bytes) override {
    BRAID_REQUIRE(p != nullptr, "nccl-ce comm: register_window of no memory");
    bytes = std::max<size_t>(bytes, 256);
    for (size_t k = 0; k < windows_.size(); ++k)
      if (windows_[k]->get() == p) {
        BRAID_REQUIRE(windows_[k]->bytes() == bytes, "nccl-ce comm: register_window of a window with another size");
        ++refs_[k];
        return true;
      }
    BRAID_REQUIRE(!in_window(p, 1), "nccl-ce comm: register_window inside one of its windows");
    windows_.push_back(std::make_unique<NcclWindow>(ce_, p, bytes));
    refs_.push_back(1);
    return true;
  }
  bool in_window(const void* p, size_t bytes) const override {
    const char* c = static_cast<const char*>(p);
    for (const auto& w : windows_) {
      const char* b = static_cast<const char*>(w->get());
      if (c >= b && c + bytes <= b + w->bytes()) return true;
    }
    return false;
  }
  void all_gather(const void* in, void* out, size_t count, DType t, cudaStream_t s) override {
    const size_t es = bench::dtype_size(t);
    const bool in_place = in == static_cast<const char*>(out) + size_t(rank()) * count * es;
    if (!kernels_only_ && in_place && in_window(out, count * size_t(size()) * es))
      BRAID_NCCL_CHECK(ncclAllGather(in, out, count, bench::nccl_dtype(t), ce_, s));
    else
      NcclComm::all_gather(in, out, count, t, s);
  }

 private:
  ncclComm_t ce_ = nullptr;
  std::vector<std::unique_ptr<NcclWindow>> windows_;
  std::vector<int> refs_;  // per window: alloc_window / register_window calls not yet freed
  // BRAID_NCCL_CE_KERNELS=1 (diagnosis): every all-gather on NCCL's kernels, the windows and the layer's layout
  // unchanged — what the copy engines' transfers themselves change, against the same buffers.
  const bool kernels_only_ = env::flag("BRAID_NCCL_CE_KERNELS").value_or(false);
};

}  // namespace

std::unique_ptr<Comm> make_nccl_ce_comm(Team& team) { return std::make_unique<NcclCeComm>(team); }
std::unique_ptr<Comm> make_nccl_comm(Team& team) { return std::make_unique<NcclComm>(team); }
std::unique_ptr<Comm> make_nccl_comm_split(Team& team, int max_ctas) {
  return std::make_unique<NcclComm>(team, max_ctas);
}
std::unique_ptr<Comm> make_allreducer_comm(Team& team, AllReduceOptions opt) {
  return std::make_unique<AllReducerComm>(team, opt);
}

}  // namespace braid::model
