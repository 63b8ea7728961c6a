"""The runners of a job's DiT passes: the Sampler's pass (check, plan, boundary, sample, report), a long job's passes, Hi-Res and the Refiner."""
