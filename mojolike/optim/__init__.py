"""The optimizer family's API: SGD/Adam/AdamW (`optimizers`, on `base`), gradient norms and
accumulation (`grads`), parameter groups, state files, the loss scaler and the outlier gate."""
