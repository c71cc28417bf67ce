# ctest driver: the reverse task for a few steps (dropout 0, the same global batch and seed)
# single-process, as --distributed in one process, and under mpirun with 2 ranks; the losses of
# every step must agree with the single-process run within 1e-5 relative and the final
# parameters within 1e-4 (compare_checkpoints): equal up to rounding over these 30 steps (longer
# runs drift further, README "What is guaranteed").
# Twice: with Adam and clipping (the default), and with plain SGD and no clipping, where a
# wrongly scaled gradient (averaged instead of summed) shows most. Then a 2-rank run stopped
# halfway and resumed must match too, and equal the uninterrupted 2-rank run bit for bit; and
# overlapping the all-reduce with backward changes nothing, bit for bit.
# Arguments: -DSEQ_TRAIN= -DCOMPARE= -DMPIRUN="mpirun;-np;2;..." -DWORK_DIR=
file(REMOVE_RECURSE ${WORK_DIR})
set(args --steps 30 --warmup 5 --dropout 0 --batch 16 --held-out 50 --eval-every 0 --log-every 10)
macro(run name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
  message("--- ${name}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: '${ARGN}' failed with ${rc}")
  endif()
endmacro()
foreach(opt adam sgd)
  set(cfg ${args})
  if(opt STREQUAL "sgd")
    list(APPEND cfg --optimizer sgd --clip 0)
  endif()
  set(dir ${WORK_DIR}/${opt})
  run(single ${SEQ_TRAIN} ${cfg} --out ${dir}/single)
  run(distributed_1 ${SEQ_TRAIN} ${cfg} --distributed --out ${dir}/one_rank)
  run(distributed_2 ${MPIRUN} ${SEQ_TRAIN} ${cfg} --distributed --out ${dir}/two_ranks)
  if(NOT out MATCHES "data-parallel over 2 ranks")
    message(FATAL_ERROR "the mpirun run did not report 2 ranks")
  endif()
  # One rank prints: the held-out line appears once.
  string(REGEX MATCHALL "held-out \\(50 sequences\\)" lines "${out}")
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one rank to print the summary, got ${n} copies")
  endif()
  run(compare_one_rank ${COMPARE} ${dir}/single/checkpoint.npz ${dir}/one_rank/checkpoint.npz 1e-5)
  run(compare_two_ranks ${COMPARE} ${dir}/single/checkpoint.npz ${dir}/two_ranks/checkpoint.npz 1e-5)
endforeach()
# Gradient buckets all-reduced during backward or after it: the same sums, so the same run bit
# for bit (several buckets, so several start during backward).
set(dir ${WORK_DIR}/adam)
run(overlap_2 ${MPIRUN} ${SEQ_TRAIN} ${args} --distributed --bucket-kb 64 --out ${dir}/overlap)
if(NOT out MATCHES "ddp: compute_ms=[0-9.]+ grad_bytes=[0-9]+ allreduce_ms=[0-9.]+ blocked_ms=[0-9.]+ buckets=[2-9]")
  message(FATAL_ERROR "the overlapped run did not print its ddp: line with several buckets")
endif()
run(no_overlap_2 ${MPIRUN} ${SEQ_TRAIN} ${args} --distributed --bucket-kb 64 --no-overlap --out ${dir}/no_overlap)
run(compare_overlap ${COMPARE} ${dir}/no_overlap/checkpoint.npz ${dir}/overlap/checkpoint.npz 0)
# Stopped halfway and resumed, on 2 ranks: the same run (every rank reads the checkpoint).
set(dir ${WORK_DIR}/adam)
run(stop_2 ${MPIRUN} ${SEQ_TRAIN} ${args} --distributed --stop-after 15 --out ${dir}/resumed)
run(resume_2 ${MPIRUN} ${SEQ_TRAIN} ${args} --distributed --resume --out ${dir}/resumed)
if(NOT out MATCHES "resumed from .* at step 15")
  message(FATAL_ERROR "the resumed run did not start at step 15")
endif()
run(compare_resumed ${COMPARE} ${dir}/single/checkpoint.npz ${dir}/resumed/checkpoint.npz 1e-5)
run(compare_resumed_exact ${COMPARE} ${dir}/two_ranks/checkpoint.npz ${dir}/resumed/checkpoint.npz 0)
