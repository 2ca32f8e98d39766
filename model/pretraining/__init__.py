"""Pre-training inputs: corpus readers, instance creation, masking, records, the tf.data and PyDataset pipelines."""
