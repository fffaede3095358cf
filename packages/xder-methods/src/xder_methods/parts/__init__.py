"""Building blocks that methods share: the replay buffer, per-task memories, replay helpers,
teachers, exemplar selection, gradients, the anchoring penalty, losses and heads. Imports the
core, never a method."""
