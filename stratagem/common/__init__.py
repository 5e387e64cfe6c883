"""What every layer uses: errors a person or a model can cause, configuration from the
environment, STRATAGEM_HOME, signed decisions' keys, and telemetry."""
