"""The only place the operator imports the kubernetes client."""
