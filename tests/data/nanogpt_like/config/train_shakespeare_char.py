# train a miniature character-level shakespeare model

out_dir = "out-shakespeare-char"
eval_interval = 50  # keep frequent because we'll overfit
eval_iters = 20
log_interval = 10  # don't print too too often

# we expect to overfit on this small dataset, so only save when val improves
always_save_checkpoint = False

dataset = "shakespeare_char"
batch_size = 32
block_size = 64  # context of up to 64 previous characters

learning_rate = 1e-3  # with baby networks can afford to go a bit higher
max_iters = 200
beta2 = 0.99  # make a bit bigger because number of tokens per iter is small
