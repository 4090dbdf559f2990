"""Learners of a collaboration estimate: SPO, FedAMP, FedeRiCo, SuPerFed and the baselines."""
