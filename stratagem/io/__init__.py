"""What touches the world, outside workflow code: the planner's, executor's and verifier's model
loops, notifications, plan and model configuration files, the output store, the codecs of the
data converter, and the Temporal binaries. Activities run the loops; the model providers and
tools they call are `stratagem.models` and `stratagem.tools`, the same layer."""
