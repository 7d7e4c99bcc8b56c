#pragma once
// The machines of the seed papers, as simulator models. Figures are vendors' peak numbers (FP32, the
// precision of the embedding and reduction kernels); latencies are typical measured figures, not
// specified ones — change any field to study another machine.
//
//   AMD Instinct MI210     22.6 TFLOP/s FP32 vector (45.3 with matrix cores, 181 BF16 with matrix
//                          cores), 1.6384 TB/s HBM2e (AMD MI210 product brief, 2022); xGMI 80 GB/s
//                          between the 4 GPUs of a node and InfiniBand 20 GB/s between nodes
//                          (Punniyamurthy et al., Table 1), one NIC per GPU (the direct GPU–NIC node
//                          the paper argues for, Fig. 1b)
//   NVIDIA V100 SXM2       15.7 TFLOP/s FP32 (125 FP16 with tensor cores; no bf16 units), 900 GB/s
//                          HBM2 (NVIDIA Tesla V100 datasheet); NVLink 2.0 at 25 GB/s per link and
//                          direction, two links between each pair of the 4 GPUs of a node (50 GB/s);
//                          EDR InfiniBand 100 Gb/s = 12.5 GB/s between nodes, one NIC per node (the
//                          TACC Longhorn nodes of Bian et al.: 4 V100 per node, Mellanox EDR)
//   NVIDIA A100 SXM4 80GB  19.5 TFLOP/s FP32 (312 BF16 with tensor cores, dense), 2.039 TB/s HBM2e
//                          (NVIDIA A100 Tensor Core GPU datasheet); in DGX A100 nodes of 8 (NVIDIA
//                          DGX A100 datasheet and user guide): third-generation NVLink, 12 links of
//                          25 GB/s a direction = 300 GB/s a direction a GPU (600 GB/s both ways),
//                          through NVSwitch, so any GPU reaches any other at that rate and a GPU's
//                          transfers to several peers share it; a 200 Gb/s HDR InfiniBand NIC per
//                          GPU (ConnectX-6) = 25 GB/s
//   NVIDIA H100 SXM5       67 TFLOP/s FP32 (989 BF16 with tensor cores, dense), 3.35 TB/s HBM3
//                          (NVIDIA H100 Tensor Core GPU datasheet); in DGX H100 nodes of 8 (NVIDIA
//                          DGX H100 datasheet and user guide): fourth-generation NVLink, 18 links =
//                          450 GB/s a direction a GPU (900 GB/s both ways) through NVSwitch; a
//                          400 Gb/s NDR InfiniBand NIC per GPU (ConnectX-7) = 50 GB/s
//   Google TPU v3 core     half a chip: 123 TFLOP/s BF16 and 900 GB/s HBM2 per chip of two
//                          TensorCores (Cloud TPU v3 documentation, system architecture); the
//                          matrix units' BF16 figure, the precision TPUs train in, for every kernel
//   Google TPU v3 pod      chips (two TensorCores each, 123 TFLOP/s BF16, 900 GB/s) in a 2-D torus,
//                          1024 chips for a full pod (Cloud TPU v3 documentation); each chip has 4
//                          ICI links, one per torus neighbour. Link bandwidth 82 GB/s per direction:
//                          the documentation's all-reduce bandwidth of 340 TB/s per pod is 332 GB/s
//                          per chip, over 4 links (it matches the 656 Gb/s ICI links of Jouppi et al.,
//                          "A domain-specific supercomputer for training deep neural networks",
//                          CACM 2020). Per hop 1 µs: an assumption (Google states none; "sub-
//                          microsecond" between neighbours is what third-party accounts give).
//                          With a device per TensorCore, the two cores of a chip share its links,
//                          and are joined by a link of one ICI link's figures each way: an
//                          assumption too (Google gives no figure for the path between them)
//   MI210 torus            the fused paper's scale-out simulations (its Table 2, ASTRA-Sim): one MI210
//                          a node, the nodes in a 2-D torus of 200 Gb/s links (25 GB/s a direction),
//                          700 ns a hop
//   products               of bf16 operands at the BF16 figure on the devices that have bf16 matrix
//                          units (all but the V100); of float operands at the MI210's FP32 matrix
//                          figure, as rocBLAS's SGEMM runs them on its matrix cores, and at the FP32
//                          figure elsewhere (PyTorch leaves TF32 off for products by default, so the
//                          A100's and H100's FP32 products run at FP32); every other operation at the
//                          FP32 figure
//   latencies              kernel launch 5 µs on the GPUs (HIP/CUDA launch overhead as commonly
//                          measured); none on the TPU, which runs a step as one XLA-compiled program
//                          that the host starts once (Cloud TPU documentation, "System architecture":
//                          XLA compiles the graph, the TPU runs it), not an operation at a time;
//                          per message 2 µs on xGMI/NVLink (peer copy set-up of RCCL/NCCL), 2.5 µs
//                          on HDR-class InfiniBand (NDR too) and 1.5 µs on EDR (MPI ping-pong order; the
//                          paper's ASTRA-Sim runs use 700 ns for the wire alone, Table 2)
#include <string>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/sim/machine.hpp"

namespace shardwise::sim::presets {

inline device_model mi210() { return {22.6e12, 1.6384e12, 5e-6, 181e12, 45.3e12}; }
inline device_model v100() { return {15.7e12, 900e9, 5e-6}; }
inline device_model a100() { return {19.5e12, 2.039e12, 5e-6, 312e12}; }
inline device_model h100() { return {67e12, 3.35e12, 5e-6, 989e12}; }
inline device_model tpu_v3_core() { return {61.5e12, 450e9, 0, 61.5e12}; }
inline device_model tpu_v3_chip() { return {123e12, 900e9, 0, 123e12}; }

inline link_model xgmi() { return {80e9, 2e-6, "xGMI"}; }
inline link_model infiniband_20() { return {20e9, 2.5e-6, "InfiniBand"}; }
inline link_model nvlink2_pair() { return {50e9, 2e-6, "NVLink"}; }
inline link_model infiniband_edr() { return {12.5e9, 1.5e-6, "InfiniBand EDR"}; }
inline link_model nvlink3_switch_port() { return {300e9, 2e-6, "NVLink 3, NVSwitch"}; }
inline link_model nvlink4_switch_port() { return {450e9, 2e-6, "NVLink 4, NVSwitch"}; }
inline link_model infiniband_hdr() { return {25e9, 2.5e-6, "InfiniBand HDR"}; }
inline link_model infiniband_ndr() { return {50e9, 2.5e-6, "InfiniBand NDR"}; }
inline link_model tpu_v3_ici() { return {82e9, 1e-6, "ICI"}; }
inline link_model scale_out_torus_link() { return {25e9, 700e-9, "torus link"}; }

namespace detail {
inline int node_width(const char* preset, int gpus, int gpus_per_node) {
  if (gpus < 1 || gpus_per_node < 1 || gpus % gpus_per_node != 0)
    throw argument_error(-1, preset,
                         std::to_string(gpus) + " GPUs do not fill nodes of " + std::to_string(gpus_per_node));
  return gpus_per_node;
}
}  // namespace detail

// `gpus` MI210 in nodes of `gpus_per_node` (the paper's inter-node runs: nodes of 1 GPU).
inline machine mi210_nodes(int gpus, int gpus_per_node = 4) {
  const int k = detail::node_width("presets::mi210_nodes", gpus, gpus_per_node);
  return {mi210(), topology::nodes(gpus, k, xgmi(), infiniband_20(), k)};
}

// rows x cols MI210s, one a node, in the 2-D torus of the fused paper's scale-out study.
inline machine mi210_torus(int rows, int cols) {
  return {mi210(), topology::torus_2d(rows, cols, scale_out_torus_link())};
}

// `gpus` V100 in nodes of `gpus_per_node` with `nics_per_node` EDR NICs (Longhorn's: one).
inline machine v100_nodes(int gpus, int gpus_per_node = 4, int nics_per_node = 1) {
  const int k = detail::node_width("presets::v100_nodes", gpus, gpus_per_node);
  return {v100(), topology::nodes(gpus, k, nvlink2_pair(), infiniband_edr(), nics_per_node)};
}

// `gpus` A100 SXM4 80GB in DGX A100 nodes of `gpus_per_node`: NVSwitch inside, a NIC per GPU between.
inline machine a100_nodes(int gpus, int gpus_per_node = 8) {
  const int k = detail::node_width("presets::a100_nodes", gpus, gpus_per_node);
  return {a100(), topology::switched_nodes(gpus, k, nvlink3_switch_port(), infiniband_hdr(), k)};
}

// `gpus` H100 SXM5 in DGX H100 nodes of `gpus_per_node`: NVSwitch inside, a NIC per GPU between.
inline machine h100_nodes(int gpus, int gpus_per_node = 8) {
  const int k = detail::node_width("presets::h100_nodes", gpus, gpus_per_node);
  return {h100(), topology::switched_nodes(gpus, k, nvlink4_switch_port(), infiniband_ndr(), k)};
}

// A TPU v3 pod slice of rows x cols chips in a 2-D torus (the full pod: 32 x 32), with a device per
// chip (devices_per_chip = 1) or per TensorCore (2: devices 2c and 2c + 1 are chip c's cores, each
// with half the chip's rate and memory bandwidth, sharing its 4 links).
inline machine tpu_v3_pod(int rows, int cols, int devices_per_chip = 1) {
  if (devices_per_chip != 1 && devices_per_chip != 2)
    throw argument_error(-1, "presets::tpu_v3_pod",
                         "a device per chip (1) or per TensorCore (2), not " + std::to_string(devices_per_chip));
  link_model between_cores = tpu_v3_ici();
  between_cores.kind = "between cores";
  return {devices_per_chip == 1 ? tpu_v3_chip() : tpu_v3_core(),
          topology::torus_2d(rows, cols, tpu_v3_ici(), devices_per_chip, std::move(between_cores))};
}

}  // namespace shardwise::sim::presets
