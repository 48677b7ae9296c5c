"""The real-world corpus: public TPU manifests and what their controllers make of them."""
