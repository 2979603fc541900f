"""ais_bench over softnpu: InferSession (ais_bench.infer.interface) and `python -m ais_bench --model x.om --loop N`."""
