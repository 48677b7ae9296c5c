// The two tiny programs of the e2e node's images (tests/support/node.py): the Pod sandbox's
// pause process and a container that prints what the kubelet gave it. Standard library only.
module tpu-webhook/tests/support/nodeimages

go 1.25.0
