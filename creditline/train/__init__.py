"""Training: the policy update and the loop every fit shares.

`trainer` is the clipped policy-gradient update (packing, log-probs, the loss; torchrun ranks via
`distributed`); `training_loop` is the one loop of epochs × shuffled minibatches that the update, the
step-reward models and the warm start run; `policy_update` is stage 5's entry; `warm_start` fits the initial
policy to demonstrations; `logprobs` computes chunked log-probs over large vocabularies. It never imports the
store.
"""
