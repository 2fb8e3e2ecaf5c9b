"""``python -m gpuwatch.launch [options] SCRIPT ARGS``: run a training script under gpuwatch's patches."""

from gpuwatch.train.launch import main

if __name__ == "__main__":
    raise SystemExit(main())
