"""Building blocks that methods share: the replay buffer, per-task memories, replay helpers,
teachers, exemplar selection, gradients, losses and heads. Imports the core, never a method."""
