"""gpuwatch's tests; folders mirror the package (docs/architecture.md), helpers live in tests/support."""
