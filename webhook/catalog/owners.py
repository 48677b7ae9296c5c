"""Names other projects give to what they set on TPU workloads (labels, annotations, variables)."""

from __future__ import annotations

# JobSet (sigs.k8s.io/jobset api/jobset/v1alpha2): set on every child Job and Pod.
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
# Multislice (JAX, MaxText, xpk): one slice per Job of the TPU replicatedJob.
MEGASCALE_NUM_SLICES = "MEGASCALE_NUM_SLICES"
MEGASCALE_SLICE_ID = "MEGASCALE_SLICE_ID"
MEGASCALE_COORDINATOR_ADDRESS = "MEGASCALE_COORDINATOR_ADDRESS"
# Pathways (google/pathways-job, xpk): a worker's TPU container is told where its resource manager
# is; a restarted worker reconnects to it, so retries are how Pathways recovers, not a mistake.
PATHWAYS_RESOURCE_MANAGER_FLAG = "--resource_manager_address"
