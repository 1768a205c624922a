/* qwen3: train Qwen3 with InfiniTrain's flags (see --help). */
#include "infinitrain/train.h"

int main(int argc, char **argv) { return it_train_main(argc, argv, "qwen3"); }
