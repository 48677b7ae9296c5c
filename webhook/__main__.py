"""`python -m webhook` is `tpu-webhook`."""

from webhook.cli import main

raise SystemExit(main())
