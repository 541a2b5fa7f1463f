// braid/schedule/profile.hpp — operator-pair profiles and the Overlap Effectiveness Factor.
//
// A PairTable holds what `braid profile-pairs` measures on one node for one model and parallel
// setting: the solo time of each operator (or segment) and the co-run time of pairs (a forward
// operator or segment of one strand with a backward one of the other). Eq. (1) of the paper turns
// them into the Overlap Effectiveness Factor
//     OEF(i,j) = (T_i + T_j - P_ij) / min(T_i, T_j).
// A segment is named by its operators joined with '+', e.g. "f.ag1+f.qkv".
//
// File format (text, one record per line, tab or space separated, '#' starts a comment):
//     braid-pairs 1
//     node <free text without spaces>
//     model <name>
//     parallel <setting>
//     solo <name> <microseconds>
//     corun <name-a> <name-b> <microseconds>
//     host <name> <microseconds>
// Pairs are unordered: "corun a b t" and "corun b a t" are the same record. "host" (optional, files from the
// forty-sixth session on): the host time one issue of the operator took in the profiler (the thread's time in
// the calls, less an empty step's), beside its solo GPU time: where issuing, not the GPU, would bound a pass.
#pragma once

#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/schedule/ops.hpp"

namespace braid::schedule {

/// Eq. (1): how much of the shorter operator the co-run hides; 1 = fully hidden, 0 = serial.
double overlap_effectiveness(double t_i, double t_j, double p_ij);
/// The inverse of eq. (1): the co-run time implied by an OEF.
double corun_from_oef(double t_i, double t_j, double oef);

/// Measured (or synthetic) solo and pairwise co-run times.
struct PairTable {
  std::string node = "unknown", model, parallel;
  std::map<std::string, double> solo;                          // name -> us
  std::map<std::pair<std::string, std::string>, double> corun; // (min name, max name) -> us
  std::map<std::string, double> host;                          // name -> host issue us (optional)

  /// Records a solo time.
  void set_solo(const std::string& name, double us);
  /// Records a co-run time of an unordered pair.
  void set_corun(const std::string& a, const std::string& b, double us);
  /// Records the host time to issue `name` once.
  void set_host(const std::string& name, double us);
  /// The host issue time of `name`, if recorded.
  std::optional<double> host_us(const std::string& name) const;
  /// The solo time of `name`, if recorded.
  std::optional<double> solo_us(const std::string& name) const;
  /// The co-run time of {a, b}, if recorded.
  std::optional<double> corun_us(const std::string& a, const std::string& b) const;
  /// Eq. (1) for {a, b}; nullopt unless both solos and the pair are recorded.
  std::optional<double> oef(const std::string& a, const std::string& b) const;
  /// The OEF matrix rows x cols (NaN where a value is missing).
  std::vector<std::vector<double>> oef_matrix(const std::vector<std::string>& rows,
                                              const std::vector<std::string>& cols) const;
};

/// Writes the table in the format above (sorted, so the text is canonical).
void write_pair_table(std::ostream& os, const PairTable& t);
/// Reads a table; throws UsageError naming the line on a malformed record.
PairTable read_pair_table(std::istream& is);
/// write_pair_table to a file (throws UsageError when it cannot be opened).
void save_pair_table(const std::string& path, const PairTable& t);
/// read_pair_table from a file (throws UsageError when it cannot be opened).
PairTable load_pair_table(const std::string& path);

/// The OEF assumed by the synthetic profile for operator types, after Section 3.2 of the paper:
/// computation overlaps poorly with computation (flash-attention backward worst), communication
/// overlaps well with computation, and collectives on different links overlap with each other.
struct SyntheticOverlap {
  double gemm_comm = 0.85, attn_comm = 0.75, elem_comm = 0.55, router_comm = 0.6;
  double comm_comm_other_link = 0.9, comm_comm_same_link = 0.0;
  double gemm_gemm = 0.10, attn_gemm = 0.05, attn_bwd_gemm = -0.15, elem_compute = 0.25;
};

/// The OEF `s` assigns to a forward op and a backward op.
double synthetic_oef(const Op& f, const Op& b, const SyntheticOverlap& s = {});

/// A table with every op's solo time and every forward x backward op pair's co-run time derived
/// from synthetic_oef: what `braid profile-pairs` would measure on a GPU, without one.
PairTable synthetic_pair_table(const Layer& layer, const SyntheticOverlap& s = {},
                               const std::string& node = "synthetic-h100");

}  // namespace braid::schedule
