"""How much of one object tpu-webhook reads: every loop over what a user wrote has its bound here,
so that a hostile or careless object costs milliseconds whatever its size.

Real TPU workloads are far inside every bound (a handful of containers, templates and affinity
terms, some dozens of env entries). What lies beyond a bound is left unchecked and unpatched, and
the answer says so (`tpu.checked-partly`); nothing is ever refused for being large.
"""

from __future__ import annotations

from webhook.catalog.tpu import MAX_LABEL_VALUE_LENGTH

# A Kubernetes label value: a node selector value longer than this matches no node (and it is
# never taken for a typo of a known one: the edit distance is not computed on it).
MAX_LABEL_VALUE = MAX_LABEL_VALUE_LENGTH
# Pod templates read from one list of an owner (a JobSet's replicatedJobs, a RayCluster's
# workerGroupSpecs).
MAX_POD_TEMPLATES = 64
# Containers and init containers read from one pod spec.
MAX_CONTAINERS = 128
# Env entries of one container read for the worker and multislice variables; a container with
# more gets none added (a later entry of the same name would win over ours).
MAX_ENV = 1024
# Words of one container's command or args read for a flag (a Pathways worker's).
MAX_ARGS = 1024
# Ports of one pod spec read for the TPU ports; with more, none are added.
MAX_PORTS = 1024
# Required node-affinity terms, and expressions per term, read for the TPU labels; beyond them
# the node's TPU type and topology count as not known in advance.
MAX_AFFINITY_TERMS = 64
# ownerReferences read for the controlling one (only one may be the controller).
MAX_OWNER_REFERENCES = 64
# Denials, and warnings, in one answer: the rest are counted ("and 12 more").
MAX_FINDINGS = 16
# A user's value quoted in a message, in characters: a longer one is cut, its length said.
MAX_VALUE_CHARS = 96
