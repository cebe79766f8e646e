"""The port: what the store asks of a backend (the recorder protocol) and the values that
cross it (scanned records, erasures, hash-chain heads), with no backend's code."""
