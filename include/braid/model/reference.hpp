// braid/model/reference.hpp — float64 CPU reference of one decoder layer (dense or MoE), forward and
// backward (input and weight gradients), plus the weight sharding the GPU layer uses. CPU only.
//
// Layer: h1 = RMSNorm(x)·g1; q,k,v = h1·Wq, h1·Wk, h1·Wv; RoPE(q,k); o = causal GQA attention;
// x1 = x + o·Wo; h2 = RMSNorm(x1)·g2; y = x1 + MLP(h2), MLP = (silu(h2·W1) ∘ (h2·W3))·W2, or for MoE
// Σ_{e in top-k(h2·Wr)} p_e · MLP_e(h2) with p = softmax over the k selected logits (Mixtral).
// RoPE pairs (i, i + d/2) (the Hugging Face "rotate_half" convention), angle pos · theta^(-2i/d).
#pragma once

#include <cstdint>
#include <vector>

#include "braid/model/config.hpp"

namespace braid::model {

// Weights (or their gradients) in float64, row-major [in, out]. Full layout (tp = 1):
//   norm1, norm2 [H]; wq [H, heads·d]; wk, wv [H, kv_heads·d]; wo [heads·d, H]
//   dense: w1 (gate), w3 (up) [H, F]; w2 (down) [F, H]
//   MoE:   router [H, E]; w1, w3 [E, H, F]; w2 [E, F, H]
// A rank's shard (shard_of) has the same fields: wq/wk/wv keep the rank's heads (columns), wo its rows,
// dense w1/w3 its F/tp columns and w2 its rows; MoE keeps whole experts E/tp per rank; norms and the
// router are replicated.
struct LayerWeights {
  std::vector<double> norm1, norm2, wq, wk, wv, wo, w1, w3, w2, router;
};

// Deterministic weights, already rounded to bf16 values (so a bf16 GPU layer starts from the same
// numbers): projections uniform in ±1/sqrt(fan_in), norms 1 ± 0.1, router ±1/sqrt(H).
LayerWeights init_weights(const ModelConfig& c, uint64_t seed);
// n values uniform in [-scale, scale], rounded to bf16 values.
std::vector<double> random_values(size_t n, uint64_t seed, double scale);
double round_to_bf16(double v);

LayerWeights shard_of(const LayerWeights& full, const ModelConfig& c, const Parallel& p, int rank);

struct RefResult {
  std::vector<double> y;   // [T, H]
  std::vector<double> dx;  // [T, H] (empty when dy was empty)
  LayerWeights grad;       // full layout (empty when dy was empty)
  std::vector<int> routes; // MoE: [T, top_k] chosen experts
  std::vector<int64_t> expert_tokens;  // MoE: rows per expert (kept ones)
  std::vector<char> kept;              // MoE: [T, top_k] 1 where the (token, k) reached its expert (capacity)
  std::vector<double> logits;          // MoE: [T, E] router logits
};
// Forward, and backward when dy ([T, H]) is not empty. x is [T, H].
// MoE: `routes` ([T, top_k] expert ids, k distinct per token), when given, replaces the top-k choice
// (the gates are still the softmax of the chosen logits). Top-k is discontinuous: a GPU whose bf16
// logits order two near-equal experts the other way routes that token differently, and every gradient
// summed over tokens moves by that token's whole contribution. Comparing a GPU layer against the
// reference computed with the GPU's own routes removes that discontinuity (see docs/layer.md).
// MoE with c.capacity > 0: tokens form groups of `capacity_group` (a source rank's local tokens; 0: all
// tokens), and each (group, expert) keeps its first c.expert_capacity(capacity_group) (token, k) in order
// t, then k; the others are dropped (no output, no gradient), as the GPU layer does.
RefResult reference_layer(const ModelConfig& c, const LayerWeights& w, const std::vector<double>& x,
                          const std::vector<double>& dy, const std::vector<int>* routes = nullptr,
                          int64_t capacity_group = 0);

// MoE: how far `routes` ([T, top_k], e.g. a GPU layer's) is from the float64 top-k of `ref`: per token,
// the largest logit of ref left out by routes minus the smallest one chosen (<= 0 for a true top-k);
// returns the maximum over tokens, and in *differ the number of tokens whose expert set is not
// ref.routes'. A bf16 layer's routes should stay within a few 1e-3 (near ties only).
double route_deficit(const ModelConfig& c, const RefResult& ref, const std::vector<int>& routes, int* differ = nullptr);

// Σ y ∘ dy: the scalar whose gradient reference_layer returns (for finite-difference checks); routes
// as in reference_layer.
double reference_loss(const ModelConfig& c, const LayerWeights& w, const std::vector<double>& x,
                      const std::vector<double>& dy, const std::vector<int>* routes = nullptr,
                      int64_t capacity_group = 0);

// Field access by name ("norm1", "wq", ...); nullptr for an unknown name.
std::vector<double>* field(LayerWeights& w, const std::string& name);
const std::vector<double>* field(const LayerWeights& w, const std::string& name);
std::vector<std::string> field_names(const ModelConfig& c);

}  // namespace braid::model
