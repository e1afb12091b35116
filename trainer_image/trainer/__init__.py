"""The trainplane trainer: one entry point for SageMaker, EC2 and local runs."""
