%% cbcmn-baseline-erlang: the actor shapes of `cbcmn-bench actors` with
%% Erlang processes (issue 16's "for scale": Erlang/OTP's figures measured
%% in the same run as ours).  The Makefile compiles this module into
%% build/erl/ and installs tools/baseline/erlang.sh as
%% build/bin/cbcmn-baseline-erlang, which starts `erl +S N:N` (N from
%% --workers, as cbcmn's executors) and calls main/0.  cbcmn-bench runs it
%% between its own repetitions and prints the ratios; run alone:
%%
%%   cbcmn-baseline-erlang ring [--ring N] [--hops N] [--workers N] [--reps N]
%%   -> "ring erlang_ring_ns_per_hop X"
%%   cbcmn-baseline-erlang skynet [--leaves N] [--workers N] [--reps N]
%%   -> "skynet erlang_skynet_ms X"
%%
%% The medians of the reps (the timings exclude the VM's start).
-module(cbcmn_baseline).
-export([main/0]).

%% The processes are linked to their spawners and this one traps exits:
%% a process that fails ends the run (exit 1), never leaves it waiting.
%% The arguments: those after erl's -extra (erl would take any before it
%% that starts with '-' for its own).
main() ->
    Args = init:get_plain_arguments(),
    process_flag(trap_exit, true),
    try run(Args) of
        ok -> halt(0)
    catch
        throw:{usage, Msg} ->
            io:format(standard_error, "cbcmn-baseline-erlang: ~s~n", [Msg]),
            halt(2);
        throw:{wrong, Msg} ->
            io:format(standard_error, "cbcmn-baseline-erlang: ~s~n", [Msg]),
            halt(1);
        Class:Reason ->
            io:format(standard_error, "cbcmn-baseline-erlang: ~p ~P~n", [Class, Reason, 8]),
            halt(1)
    end.

%% A message, or the failure of a linked process.
await(Tag) ->
    receive
        {Tag, V} -> V;
        {'EXIT', _, Why} when Why =/= normal ->
            throw({wrong, io_lib:format("a process failed: ~P", [Why, 8])})
    end.

flush_exits() ->
    receive {'EXIT', _, _} -> flush_exits() after 0 -> ok end.

run([Bench | Opts]) when Bench =:= "ring"; Bench =:= "skynet" ->
    O = opts(Opts, #{workers => 2, reps => 7, ring => 10000, hops => 1000000,
                     leaves => 1000000}),
    #{reps := Reps, ring := N, hops := Hops, leaves := Leaves} = O,
    Bench =:= "skynet" andalso not power_of_10(Leaves) andalso
        throw({usage, io_lib:format("--leaves wants a power of 10 from 10, got ~b",
                                    [Leaves])}),
    V = lists:sort([case Bench of
                        "ring" -> ring_once(N, Hops);
                        "skynet" -> skynet_once(Leaves)
                    end || _ <- lists:seq(1, Reps)]),
    Metric = case Bench of
                 "ring" -> "erlang_ring_ns_per_hop";
                 "skynet" -> "erlang_skynet_ms"
             end,
    io:format("~s ~s ~.1f~n", [Bench, Metric, lists:nth(Reps div 2 + 1, V)]),
    ok;
run(["--help" | _]) ->
    io:format("usage: cbcmn-baseline-erlang ring|skynet [--workers N] [--reps N] "
              "[--ring N] [--hops N] [--leaves N]~n"),
    ok;
run([Bench | _]) ->
    throw({usage, io_lib:format("no benchmark named '~s' (ring, skynet)",
                                [lists:sublist(Bench, 40)])});
run([]) ->
    throw({usage, "usage: cbcmn-baseline-erlang ring|skynet [--workers N] [--reps N] "
                  "[--ring N] [--hops N] [--leaves N]"}).

opts([], O) ->
    O;
opts([Name, Val | Rest], O) ->
    {Key, Max} = case Name of
                     "--workers" -> {workers, 1024};
                     "--reps" -> {reps, 1024};
                     "--ring" -> {ring, 10000000};
                     "--hops" -> {hops, 1000000000};
                     "--leaves" -> {leaves, 10000000};
                     _ -> throw({usage, io_lib:format("unknown option '~s'",
                                                      [lists:sublist(Name, 40)])})
                 end,
    N = try list_to_integer(Val) catch error:badarg -> 0 end,
    (N >= 1 andalso N =< Max) orelse
        throw({usage, io_lib:format("~s needs a number from 1 to ~b", [Name, Max])}),
    opts(Rest, O#{Key => N});
opts([Name], _) ->
    throw({usage, io_lib:format("~s needs a number", [lists:sublist(Name, 40)])}).

power_of_10(10) -> true;
power_of_10(N) when N > 10, N rem 10 =:= 0 -> power_of_10(N div 10);
power_of_10(_) -> false.

now_ns() ->
    erlang:monotonic_time(nanosecond).

%% N processes in a ring, a token passed Hops times: each hop takes the
%% token from the process's mailbox, counts it down and sends it to the
%% next.  Timed from the token's first send to its end, after the
%% processes are spawned and linked up (as cbcmn-bench times after the
%% spawns).
ring_once(N, Hops) ->
    Self = self(),
    Pids = [spawn_link(fun() -> ring_start(Self, I) end) || I <- lists:seq(0, N - 1)],
    Tuple = list_to_tuple(Pids),
    [P ! {next, element((I + 1) rem N + 1, Tuple)} || {I, P} <- lists:zip(lists:seq(0, N - 1), Pids)],
    T0 = now_ns(),
    hd(Pids) ! {token, Hops},
    At = await(done),
    Ns = (now_ns() - T0) / Hops,
    [P ! stop || P <- Pids],
    [receive {'EXIT', P, _} -> ok end || P <- Pids],
    At =:= Hops rem N orelse
        throw({wrong, io_lib:format("ring: the token ended at process ~b, not ~b",
                                    [At, Hops rem N])}),
    Ns.

ring_start(Parent, I) ->
    receive {next, Next} -> ring_loop(Parent, I, Next) end.

ring_loop(Parent, I, Next) ->
    receive
        stop ->
            ok;
        {token, 0} ->
            Parent ! {done, I},
            ring_loop(Parent, I, Next);
        {token, V} ->
            Next ! {token, V - 1},
            ring_loop(Parent, I, Next)
    end.

%% The 10-ary tree: a leaf sends its index to its parent, an inner node
%% spawns its ten children and sends the sum of their answers up.  Timed
%% from the root's spawn to its answer, the spawns included (as
%% cbcmn-bench times its tree's).
skynet_once(Leaves) ->
    Self = self(),
    T0 = now_ns(),
    spawn_link(fun() -> skynet(Self, 0, Leaves) end),
    Sum = await(sum),
    Ms = (now_ns() - T0) / 1.0e6,
    flush_exits(),
    Want = Leaves * (Leaves - 1) div 2,
    Sum =:= Want orelse
        throw({wrong, io_lib:format("skynet: sum ~b, expected ~b", [Sum, Want])}),
    Ms.

skynet(Parent, Index, 1) ->
    Parent ! {sum, Index};
skynet(Parent, Index, Size) ->
    Self = self(),
    Step = Size div 10,
    [spawn_link(fun() -> skynet(Self, Index + I * Step, Step) end) || I <- lists:seq(0, 9)],
    Parent ! {sum, skynet_sum(10, 0)}.

skynet_sum(0, Sum) ->
    Sum;
skynet_sum(K, Sum) ->
    receive {sum, S} -> skynet_sum(K - 1, Sum + S) end.
