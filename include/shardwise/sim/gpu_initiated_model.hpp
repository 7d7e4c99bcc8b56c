#pragma once
// What GPU-initiated communication costs on a simulated GPU, beyond the device model's roofline: how
// many workgroups are resident at once (the concurrency a kernel's logical workgroups share) and what
// each network message costs the NIC besides its bytes.
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
namespace shardwise::sim {

struct gpu_initiated_model {
  int resident_workgroups = 1040;
  double message_overhead = 0.125e-6;  // s per message (a slice's put and its flag are two)
};

}  // namespace shardwise::sim
