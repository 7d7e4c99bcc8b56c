#pragma once
// What GPU-initiated communication costs on a simulated GPU, beyond the device model's roofline: how
// many workgroups are resident at once (the concurrency a kernel's logical workgroups share), what
// each network message costs the NIC besides its bytes, and how the fused forward's kernel is launched.
//
//   resident_workgroups  a workgroup alone gets 1/resident_workgroups of the device's FLOP/s and
//                        memory bandwidth, so a kernel of fewer logical workgroups than that cannot
//                        fill the GPU (MI210: 104 compute units × 10 workgroups of 256 threads,
//                        the occupancy limit of 2560 threads per unit)
//   message_overhead     time a NIC spends on each GPU-initiated message before its bytes stream
//                        (its message rate: proxy and doorbell work of ROC_SHMEM-style puts); not
//                        a vendor figure: set so that slices of 4 embeddings cost ~2× slices of 64
//                        on the paper's inter-node study (Punniyamurthy et al., Fig. 12)
//   Peers that share memory (xGMI, NVLink inside a node) take stores: no message overhead.
//   kernel_per_table     false: the fused embedding's forward is one persistent kernel over every local
//                        table (the paper's inter-node kernel); true: a kernel per table, each launched
//                        when the previous one has ended, as the paper's intra-node zero-copy kernel is
//                        ("we launch a zero-copy fused kernel per table similar to the baseline",
//                        Punniyamurthy et al., Section 4.3); it keeps the launches and the tables'
//                        under-filled kernels that the persistent kernel saves.
namespace shardwise::sim {

struct gpu_initiated_model {
  int resident_workgroups = 1040;
  double message_overhead = 0.125e-6;  // s per message (a slice's put and its flag are two)
  bool kernel_per_table = false;
};

}  // namespace shardwise::sim
