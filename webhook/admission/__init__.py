"""Transport: AdmissionReview in, AdmissionReview out; no HTTP here, no rules either."""
